"""Data-source descriptions (what discovery hands the planner) for the planner's tests."""

from __future__ import annotations


def column(name, data_type="integer", *, pk=False, fk=None, values=()):
    return {"column_name": name, "data_type": data_type, "is_primary_key": pk, "foreign_key": fk,
            "sample_values": list(values)}


def shop(dialect="sqlite") -> dict:
    """snake_case keys, none declared."""
    return {"data_source_id": 3, "name": "shop", "type": dialect, "dialect": dialect, "schemas": [
        {"table_name": "customers", "columns": [column("id", pk=True), column("full_name", "text"),
                                                column("region", "text", values=["North", "South"])]},
        {"table_name": "orders", "columns": [column("id", pk=True), column("customer_id"),
                                             column("amount", "numeric(10,2)"), column("placed_on", "date")]},
        {"table_name": "order_lines", "columns": [column("id", pk=True), column("order_id"),
                                                  column("sku_id"), column("units")]},
    ]}


def music() -> dict:
    """PascalCase keys, declared on one table and left to naming on the other."""
    return {"data_source_id": 4, "name": "music", "type": "postgresql", "dialect": "postgresql", "schemas": [
        {"table_name": "Band", "columns": [column("BandId", pk=True), column("Name", "character varying(80)")]},
        {"table_name": "Record", "columns": [column("RecordId", pk=True), column("Title", "text"),
                                             column("BandId", fk="Band.BandId")]},
        {"table_name": "Song", "columns": [column("SongId", pk=True), column("RecordId"),
                                           column("Seconds", "integer")]},
    ]}
