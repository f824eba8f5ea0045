// The one C export behind guarded.h's error slot, read by every shim's Rust side.

#include "guarded.h"

extern "C" {

// The message of the last failed shim call on this thread.
const char* groundrl_last_error() { return groundrl::last_error.c_str(); }

}  // extern "C"
