#include <sqlite3.h>
#include "docfs_sqlite.h"

int docfs_sqlite_plan_without_bound_values(void *db) {
    return sqlite3_db_config((sqlite3 *)db, SQLITE_DBCONFIG_ENABLE_QPSG, 1, (int *)0);
}

int docfs_sqlite_statement_recompilations(void *statement) {
    return sqlite3_stmt_status((sqlite3_stmt *)statement, SQLITE_STMTSTATUS_REPREPARE, 0);
}
