/* A driver-side program on the installed engine header (<hilock/engine.h>,
 * advanced API, static linking only): it runs the release machine and the
 * settle machine against canned replies, as a new language driver would
 * against its own sockets. Exit 0 when every step is as documented. */
#define HILOCK_ENGINE_STATIC_LINKING_ONLY
#include <hilock/engine.h>
#include <stdio.h>
#include <string.h>

static redisReply *parse(const char *bytes)
{
    redisReader *rd = redisReaderCreate();
    void *r = NULL;
    if (redisReaderFeed(rd, bytes, strlen(bytes)) != REDIS_OK || redisReaderGetReply(rd, &r) != REDIS_OK)
        r = NULL;
    redisReaderFree(rd);
    return r;
}

#define CHECK(x) do { if (!(x)) { fprintf(stderr, "engine consumer: %s failed\n", #x); return 1; } } while (0)

int main(void)
{
    hl_names n;
    const char *owner = "6f1c2d3e-0000-4000-8000-000000000001:7";
    CHECK(hl_names_init(&n, "orders:42") == 0);

    /* release: a partial unlock re-applies the acquire's lease */
    hl_release m;
    CHECK(hl_release_init(&m, HILOCK_KIND_REENTRANT, &n, owner, 7000, 30000, "cid:1", 1000, 0, 0) == 0);
    CHECK(hl_release_next(&m, 0) == HL_ACT_SEND);
    CHECK(m.cmd.argc > 7 && strcmp(m.cmd.argv[7], "7000") == 0);
    redisReply *r = parse(":1\r\n");
    CHECK(r != NULL);
    hl_release_on_reply(&m, r, 1);
    freeReplyObject(r);
    CHECK(hl_release_next(&m, 1) == HL_ACT_DONE && m.result == 0 && m.remaining == 1);
    hl_release_free(&m);

    /* settle: a late grant of an attempt whose reply never came is released */
    hl_cmd attempt;
    hl_cmd_acquire(&attempt, HILOCK_KIND_REENTRANT, &n, owner, 9000, -1);
    hl_settle s;
    CHECK(hl_settle_init(&s, &attempt, "publish", "cid:2", 1000, 0) == 0);
    CHECK(hl_settle_next(&s, 0) == HL_ACT_WAIT);
    r = parse("*2\r\n:1\r\n:1\r\n");
    CHECK(r != NULL);
    hl_settle_on_reply(&s, r, 1);
    freeReplyObject(r);
    CHECK(hl_settle_next(&s, 1) == HL_ACT_SEND && s.outcome == HL_SETTLE_RELEASED);
    hl_settle_free(&s);
    hl_names_free(&n);
    printf("engine consumer: ok\n");
    return 0;
}
