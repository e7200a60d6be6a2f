#ifndef DOCFS_SQLITE_H
#define DOCFS_SQLITE_H

/// Turns on SQLite's query planner stability guarantee (SQLITE_DBCONFIG_ENABLE_QPSG) on the
/// connection `db` (a sqlite3 *): plans never depend on the values bound to a statement, so a
/// cached statement is not compiled again each time its values change. Answers SQLite's code.
/// A C function because sqlite3_db_config is variadic, which Swift cannot call.
int docfs_sqlite_plan_without_bound_values(void *db);

/// How many times SQLite compiled the statement `statement` (a sqlite3_stmt *) again since it
/// was first compiled (SQLITE_STMTSTATUS_REPREPARE).
int docfs_sqlite_statement_recompilations(void *statement);

#endif
