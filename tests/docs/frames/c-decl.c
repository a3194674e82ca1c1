/* Frame "c-decl" (tests/docs): declarations shown in the docs are compiled
 * after the public headers, so each must match what the headers declare. */
#include <hilock.h>

@BLOCK@
