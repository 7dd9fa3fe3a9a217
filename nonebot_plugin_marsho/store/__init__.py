"""Everything kept: session keys and the History interface (session), the SQL store (sql:
SQLite by default, PostgreSQL for several processes) and its versioned migrations.

May import only the shared top-level modules (exceptions, i18n); never agent/, tools/, chat/.
"""
