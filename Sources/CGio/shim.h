// GIO's content types (shared-mime-info: globs and magic), for the index's content types.
#include <gio/gio.h>
