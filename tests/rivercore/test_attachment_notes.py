"""The offline planner reads a question without the notes that name attached files."""

from rivercore.attachments import attachment_notes_removed


def test_whole_note_lines_go_and_everything_else_stays():
    text = ("Total per region?\n\n[Attached file 'sales.csv': artifact 3, version 1, text/csv, 43 bytes; query "
            "table sales on data source 7 with execute_query]\n  [Attached file 'a]b.txt': artifact 4, version 2, "
            "text/plain, 9 bytes; read it with load_artifact]  ")
    assert attachment_notes_removed(text) == "Total per region?"
    # A person's own words that merely look like the start of a note are kept.
    own = "Why does [Attached file appear in my export?"
    assert attachment_notes_removed(own) == own
    assert attachment_notes_removed("[Attached file 'x.csv': artifact 1]") == ""
