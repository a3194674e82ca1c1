/*
 * libFuzzer target: pub/sub payloads. A message on a lock channel must
 * wake a waiter only for exactly "0" or "1" (Redisson's unlock messages);
 * anything else is ignored, never a crash. The input is split into a
 * frame kind, a channel and a payload, framed as the server would send it
 * and parsed by the bounded reader, then decoded.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

#define CHECK(x)         \
    do {                 \
        if (!(x))        \
            abort();     \
    } while (0)

static const char *const kinds[] = {"message",    "smessage",   "subscribe", "ssubscribe",
                                    "unsubscribe", "sunsubscribe", "pmessage",  "pong"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2 || size > 4096)
        return 0;
    const char *kind = kinds[data[0] & 7];
    int payload_int = data[0] & 8; /* the payload as :N instead of $len */
    size_t chan_len = data[1] % (size - 1);
    const char *chan = (const char *)data + 2;
    const char *payload = chan + chan_len;
    size_t payload_len = size - 2 - chan_len;

    size_t cap = 64 + size + strlen(kind);
    char *frame = malloc(cap);
    if (!frame)
        return 0;
    int n = snprintf(frame, cap, "*3\r\n$%zu\r\n%s\r\n$%zu\r\n", strlen(kind), kind, chan_len);
    size_t len = (size_t)n;
    memcpy(frame + len, chan, chan_len);
    len += chan_len;
    if (payload_int) { /* integer frame: the payload's bytes as digits, if any */
        len += (size_t)snprintf(frame + len, cap - len, "\r\n:%.*s\r\n",
                                (int)(payload_len > 20 ? 20 : payload_len), payload);
    } else {
        len += (size_t)snprintf(frame + len, cap - len, "\r\n$%zu\r\n", payload_len);
        memcpy(frame + len, payload, payload_len);
        len += payload_len;
        memcpy(frame + len, "\r\n", 2);
        len += 2;
    }

    redisReader *rd = redisReaderCreate();
    CHECK(rd && hl_reader_bound(rd) == 0);
    void *reply = NULL;
    if (redisReaderFeed(rd, frame, len) == REDIS_OK &&
        redisReaderGetReply(rd, &reply) == REDIS_OK && reply) {
        hl_ps_event ev;
        hl_decode_pubsub(reply, &ev);
        int is_msg = !strcmp(kind, "message") || !strcmp(kind, "smessage");
        int exact = !payload_int && payload_len == 1 && (payload[0] == '0' || payload[0] == '1');
        if (is_msg) {
            CHECK(ev.type == HL_PS_MESSAGE);
            CHECK(ev.channel_len == chan_len && !memcmp(ev.channel, chan, chan_len));
            CHECK(ev.payload == (exact ? payload[0] - '0' : -1));
        } else {
            CHECK(ev.payload == -1);
        }
        freeReplyObject(reply);
    }
    redisReaderFree(rd);
    free(frame);
    return 0;
}
