// The dynamic loader keeps a few allocations for the life of the process
// (dlerror's per-thread buffer after a failed dlopen, strings a loaded
// library keeps): not tx's leaks. Under ASan the leak checker is told to
// ignore what is allocated while a library is opened; elsewhere this is
// nothing. Private to the runtime.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#define TX_IGNORE_LOADER_LEAKS __lsan::ScopedDisabler tx_lsan_off
#else
#define TX_IGNORE_LOADER_LEAKS (void)0
#endif
