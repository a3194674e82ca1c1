/* Protocol layer: the rules of a multi-lock and of Redlock (what counts as
 * taken, how long a Redlock grant is valid, what a failed attempt gives
 * back). No I/O, no clock: the driver (multilock.c) passes the times in. */
#include "proto.h"

size_t hl_ml_quorum(int redlock, size_t n)
{
    return redlock ? n / 2 + 1 : n;
}

int64_t hl_ml_drift(int64_t lease_ms)
{
    return lease_ms / 100 + 2;
}

int64_t hl_ml_validity(int64_t lease_ms, int64_t t0_ms, int64_t t1_ms)
{
    return lease_ms - (t1_ms - t0_ms) - hl_ml_drift(lease_ms);
}

int hl_ml_success(int redlock, size_t n, size_t ok, int fatal, int64_t validity_ms)
{
    if (fatal)
        return 0;
    return redlock ? ok >= hl_ml_quorum(1, n) && validity_ms > 0 : ok == n;
}

int hl_ml_take_back(int redlock, int reentry, int rc)
{
    if (rc == 0)
        return 1; /* taken by this attempt */
    if (reentry)
        return 0; /* an unanswered member may still carry the outer hold */
    if (redlock)
        return rc != HILOCK_ECLOSED; /* every node, even one that seemed to fail */
    /* a multi-lock: the members in doubt (the request may have run) */
    return rc != HILOCK_ETIMEDOUT && rc != HILOCK_ECLOSED && rc != HILOCK_EINVAL &&
           rc != HILOCK_ENOMEM;
}

int hl_ml_hold_lost(int redlock, size_t n, size_t nacquired, size_t nlost)
{
    if (!redlock)
        return nlost > 0;
    return nacquired - nlost < hl_ml_quorum(1, n);
}
