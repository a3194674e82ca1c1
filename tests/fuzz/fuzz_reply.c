/*
 * libFuzzer target: raw RESP bytes from a server, through hiredis's reader
 * bounded the way every hilock connection is (hl_reader_bound), fed in
 * chunks (the first input byte picks the chunk size, so partial replies are
 * exercised), then every reply through every decoder, the redirect parser
 * and the engine's machines. Checks the promises the decoders make about
 * the numbers they hand on; -malloc_limit_mb catches a reply that makes us
 * allocate far more than it is long.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

#define CHECK(x)         \
    do {                 \
        if (!(x))        \
            abort();     \
    } while (0)

static void decoders(const redisReply *r)
{
    hl_acquire_result a;
    if (hl_decode_acquire(r, &a) == 0)
        CHECK(a.acquired ? a.hold_count >= 1
                         : a.ttl_ms >= -2 && a.ttl_ms <= HILOCK_MAX_TIME_MS);
    hl_release_result rel;
    if (hl_decode_release(r, &rel) == 0)
        CHECK(rel.remaining >= 0 && (!rel.not_owner || rel.remaining == 0));
    int64_t v;
    if (hl_decode_flag(r, &v) == 0)
        CHECK(v == 0 || v == 1);
    if (hl_decode_pttl(r, &v) == 0)
        CHECK(v >= -2);
    if (hl_decode_hold_count(r, &v) == 0)
        CHECK(v >= 0);
    (void)hl_decode_int(r, &v);
    if (hl_decode_token(r, &v) == 0)
        CHECK(v >= 0);
    for (int kind = HILOCK_KIND_REENTRANT; kind <= HILOCK_KIND_FENCED; kind++)
        if (hl_decode_acquire_kind((hilock_kind)kind, r, &a) == 0)
            CHECK(a.acquired ? a.hold_count >= 1 &&
                                   (kind == HILOCK_KIND_FENCED ? a.token >= 1 : a.token == 0)
                             : a.ttl_ms >= -2 && a.ttl_ms <= HILOCK_MAX_TIME_MS);
    for (int kind = HILOCK_KIND_REENTRANT; kind <= HILOCK_KIND_FENCED; kind++)
        if (hl_decode_is_locked((hilock_kind)kind, r, &v) == 0)
            CHECK(v == 0 || v == 1);
    (void)hl_reply_is_noscript(r);
    (void)hl_reply_not_master(r);

    hl_ps_event ev;
    hl_decode_pubsub(r, &ev);
    CHECK(ev.payload >= -1 && ev.payload <= 1);
    if (ev.type != HL_PS_OTHER)
        CHECK(ev.channel != NULL);
    if (ev.payload >= 0)
        CHECK(ev.type == HL_PS_MESSAGE);
    CHECK(ev.value >= -1);
    if (ev.value >= 0)
        CHECK(ev.type == HL_PS_MESSAGE);
    for (int rule = HL_WAKE_LOCK; rule <= HL_WAKE_LATCH; rule++) {
        int64_t w = hl_ps_wakes((hl_wake_rule)rule, &ev);
        CHECK(w >= -1);
        if (w != 0)
            CHECK(ev.type == HL_PS_MESSAGE);
    }

    /* semaphores and latch: counts within the bounds the scripts keep */
    if (hl_sem_decode_count(r, &v) == 0)
        CHECK(v >= -HL_SEM_COUNT_MAX && v <= HL_SEM_COUNT_MAX);
    if (hl_sem_decode_int(r, &v) == 0)
        CHECK(v >= -HL_SEM_COUNT_MAX && v <= HL_SEM_COUNT_MAX);
    (void)hl_sem_decode_error(r);
    hl_sem_names sn;
    static const unsigned char ids[HL_PES_ID_BYTES] = {1};
    for (int kind = HL_SEM_SEMAPHORE; kind <= HL_SEM_LATCH; kind++) {
        CHECK(hl_sem_names_init(&sn, (hl_sem_kind)kind, "fuzz") == 0);
        hl_semwait m;
        CHECK(hl_semwait_init(&m, (hl_sem_kind)kind, &sn, 1, 1000, ids, 5000, 0) == 0);
        int64_t now = 0;
        for (int step = 0; step < 12; step++, now += 10) {
            hl_action act = hl_semwait_next(&m, now);
            if (act == HL_ACT_DONE)
                break;
            if (act == HL_ACT_SEND)
                hl_semwait_on_reply(&m, r, now);
            else if (act == HL_ACT_SUBSCRIBE)
                hl_semwait_on_subscribed(&m, 1, now);
            else if (act == HL_ACT_WAIT) {
                CHECK(m.sleep_ms >= 0 && m.sleep_ms <= 5000);
                hl_semwait_on_wake(&m, now);
            }
        }
        CHECK(m.result <= 0);
        hl_sem_names_free(&sn);
    }

    unsigned slot;
    char host[256];
    int port;
    int kind = hl_parse_redirect(r, &slot, host, sizeof host, &port);
    if (kind)
        CHECK((kind == 1 || kind == 2) && slot < HL_SLOTS && port >= 1 && port <= 65535 &&
              memchr(host, 0, sizeof host) != NULL);

    hl_slot_range sr;
    if (r->type == REDIS_REPLY_ARRAY)
        for (size_t i = 0; i < r->elements; i++)
            if (hl_decode_slot_range(r->element[i], &sr) == 0)
                CHECK(sr.lo <= sr.hi && sr.hi < HL_SLOTS && sr.port >= 1 && sr.port <= 65535 &&
                      sr.host[0] != 0);
    if (hl_decode_master_addr(r, host, sizeof host, &port) == 0)
        CHECK(port >= 1 && port <= 65535 && host[0] != 0);

    if (hl_decode_switch_master(r, "mymaster", host, sizeof host, &port))
        CHECK(port >= 1 && port <= 65535 && memchr(host, 0, sizeof host) != NULL);

    int is_master = 0;
    CHECK(hl_decode_role_replicas(r, &is_master) >= 0);

    /* inspection: numbers checked, owners terminated, nothing on failure */
    hilock_lock_info *info = NULL;
    char ierr[HL_URL_ERR_MAX] = "";
    if (hl_decode_inspect(r, "fuzz", &info, ierr) == 0) {
        CHECK(info && info->lease_ms >= -2 && info->server_time_ms >= 0 && info->token >= 0);
        for (size_t i = 0; i < info->nholders; i++)
            CHECK(info->holders[i].holds >= -1 &&
                  info->holders[i].owner[info->holders[i].owner_len] == 0);
        for (size_t i = 0; i < info->nqueue; i++)
            CHECK(info->queue[i].deadline_ms >= -1);
        CHECK(info->npermits <= info->permits_taken);
        for (size_t i = 0; i < info->npermits; i++)
            CHECK(info->permits[i].lease_end_ms >= -1 && strlen(info->permits[i].id) <= 128);
        hl_info_free(info);
    } else {
        CHECK(info == NULL && ierr[0]);
    }
    hl_renew_outcome ro = hl_renew_classify(r);
    CHECK(ro >= HL_RENEW_RENEWED && ro <= HL_RENEW_TROUBLE);

    for (int mode = HL_MODE_SINGLE; mode <= HL_MODE_SENTINEL; mode++) {
        hl_router rt;
        hl_router_init(&rt, (hl_mode)mode);
        for (int i = 0; i < HL_ROUTE_MAX_HOPS + 2; i++) {
            hl_route_action act = hl_router_on_reply(&rt, r);
            CHECK(rt.sleep_ms >= 0);
            if (act == HL_ROUTE_MOVED || act == HL_ROUTE_ASK)
                CHECK(rt.slot < HL_SLOTS && rt.port >= 1 && rt.port <= 65535);
            if (act == HL_ROUTE_DONE || act == HL_ROUTE_FAIL)
                break;
        }
    }
}

/* Each machine gets r as the answer to whatever it sends or waits for. */
static void machines(const redisReply *r, const hl_names *n, const char *owner)
{
    int64_t now = 1000;
    for (int kind = HILOCK_KIND_REENTRANT; kind <= HILOCK_KIND_FENCED; kind++) {
        hl_acquire a;
        if (hl_acquire_init(&a, (hilock_kind)kind, n, owner, 5000, -1, 300000, now) == 0) {
            for (int step = 0; step < 12; step++) {
                hl_action act = hl_acquire_next(&a, now);
                if (act == HL_ACT_DONE)
                    break;
                if (act == HL_ACT_SEND)
                    hl_acquire_on_reply(&a, r, now);
                else if (act == HL_ACT_SUBSCRIBE)
                    hl_acquire_on_subscribed(&a, 1, now);
                else if (act == HL_ACT_WAIT) {
                    CHECK(a.sleep_ms >= -1);
                    now += a.sleep_ms > 0 ? a.sleep_ms : 1;
                    hl_acquire_on_wake(&a, now);
                }
            }
            if (a.result == 0)
                CHECK(a.hold_count >= 1);
            hl_acquire_free(&a);
        }

        hl_release m;
        if (hl_release_init(&m, (hilock_kind)kind, n, owner, 10000, 30000, "fuzz:1", 1000, 0,
                            now) == 0) {
            for (int step = 0; step < 8 && hl_release_next(&m, now) == HL_ACT_SEND; step++)
                hl_release_on_reply(&m, r, now);
            if (m.result == 0)
                CHECK(m.remaining >= 0);
            hl_release_free(&m);
        }

        hl_cmd attempt;
        hl_cmd_acquire(&attempt, (hilock_kind)kind, n, owner, 10000, 300000);
        hl_settle s;
        if (hl_settle_init(&s, &attempt, n->publish, "fuzz:2", 1000, now) == 0) {
            for (int step = 0; step < 8; step++) {
                hl_action act = hl_settle_next(&s, now);
                if (act == HL_ACT_DONE)
                    break;
                if (act == HL_ACT_WAIT)
                    hl_settle_on_reply(&s, r, now);
            }
            hl_settle_free(&s);
        }
    }
    hl_ack k;
    hl_ack_init(&k, -1, 0, 1000);
    for (int step = 0; step < 8 && hl_ack_next(&k) == HL_ACT_SEND; step++)
        hl_ack_on_reply(&k, r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t chunk = (size_t)(data[0] & 63) + 1;
    data++;
    size--;
    redisReader *rd = redisReaderCreate();
    if (!rd)
        return 0;
    CHECK(hl_reader_bound(rd) == 0);
    hl_names n;
    CHECK(hl_names_init(&n, "fuzz") == 0);
    char owner[HL_OWNER_MAX];
    hl_owner(owner, "00000000-0000-0000-0000-000000000000", 7);
    int broken = 0;
    for (size_t off = 0; off < size && !broken; off += chunk) {
        size_t len = size - off < chunk ? size - off : chunk;
        if (redisReaderFeed(rd, (const char *)data + off, len) != REDIS_OK)
            break;
        for (;;) {
            void *reply = NULL;
            if (redisReaderGetReply(rd, &reply) != REDIS_OK) {
                CHECK(rd->err != 0);
                broken = 1; /* a connection is closed after this */
                break;
            }
            if (!reply)
                break;
            decoders(reply);
            machines(reply, &n, owner);
            freeReplyObject(reply);
        }
    }
    hl_names_free(&n);
    redisReaderFree(rd);
    return 0;
}
