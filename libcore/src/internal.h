/*
 * Umbrella header for code outside libcore that still reaches its
 * internals (tests of internals; the CLI until it uses only the public API,
 * see the allow-list in tests/lint). libcore's own files include their
 * layer's header instead: proto.h, util.h, transport.h or api.h
 * (docs/architecture.md).
 */
#ifndef HILOCK_INTERNAL_H
#define HILOCK_INTERNAL_H

#include "api.h"

#endif
