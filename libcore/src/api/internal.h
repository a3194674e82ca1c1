/*
 * Umbrella header for the tests of libcore's internals (nothing else
 * outside libcore may include a private header: tests/lint). libcore's own
 * files include their layer's header instead: proto.h, util.h, transport.h
 * or api.h (docs/architecture.md).
 */
#ifndef HILOCK_INTERNAL_H
#define HILOCK_INTERNAL_H

#include "api.h"

#endif
