"""River's PostgreSQL database backend: Django's, with the pool's check of common.dbcheck."""
