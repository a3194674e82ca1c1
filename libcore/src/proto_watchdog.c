/* Protocol layer: what a watchdog renewal's answer means. No I/O. */
#include "proto.h"

hl_renew_outcome hl_renew_classify(const redisReply *r)
{
    if (!r)
        return HL_RENEW_TROUBLE;
    if (r->type == REDIS_REPLY_ERROR) {
        if (hl_reply_is_noscript(r))
            return HL_RENEW_EVAL;
        unsigned slot;
        char host[256];
        int port;
        if (hl_parse_redirect(r, &slot, host, sizeof host, &port) || hl_reply_not_master(r))
            return HL_RENEW_REDIRECT;
        return HL_RENEW_TROUBLE;
    }
    /* renew.lua answers 1 (renewed) or 0 (the owner's field is gone);
     * anything else is no answer we can act on: try again next tick */
    if (r->type != REDIS_REPLY_INTEGER)
        return HL_RENEW_TROUBLE;
    if (r->integer == 1)
        return HL_RENEW_RENEWED;
    if (r->integer == 0)
        return HL_RENEW_LOST;
    return HL_RENEW_TROUBLE;
}

int64_t hl_renew_period(int64_t watchdog_lease_ms)
{
    int64_t p = watchdog_lease_ms / 3;
    return p < 1 ? 1 : p;
}
