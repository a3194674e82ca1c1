/*
 * A TCP proxy for the C tests: listens on a free loopback port and forwards
 * every connection to a real redis-server, with faults switched on while
 * connections are live (one thread per connection, poll; no mocks):
 *
 * - th_proxy_late_reply_then_reset: the next request chunk containing pat is
 *   forwarded; the next chunk the server sends back on that connection (its
 *   reply) is held delay_ms, delivered, and then the connection is reset
 *   both ways (RST).
 * - th_proxy_hold_request: the next request chunk containing pat is held
 *   delay_ms before it reaches the server (a request delivered late); the
 *   chunks after it on that connection wait behind it, in order. It is
 *   delivered even when the client closed its side meanwhile.
 * - th_proxy_silence: drop (not hold) every byte in one direction or both,
 *   on the live connections and on those accepted later: up = requests
 *   lost, down = replies lost. (0, 0) ends it; what was dropped stays lost.
 * - th_proxy_stall_new: new connections are accepted and then never
 *   answered (connect succeeds, the handshake hangs: a load balancer or a
 *   half-dead host); they stay open and silent until th_proxy_stop.
 * - th_proxy_refuse: new connections are reset at once.
 * - th_proxy_reset: every live connection is reset (RST) both ways now.
 *
 * Per connection: a connection that has sent a request containing
 * "SUBSCRIBE" (SSUBSCRIBE too) is a subscriber, a client's pub/sub
 * connection; th_proxy_silence_subscribers and th_proxy_reset_subscribers
 * act on the live subscribers alone, so the command connections stay
 * healthy.
 */
#ifndef HILOCK_TEST_PROXY_H
#define HILOCK_TEST_PROXY_H

typedef struct th_proxy th_proxy;

/* A proxy to 127.0.0.1:port; NULL on failure. */
th_proxy *th_proxy_start(int port);
/* Its loopback port and "redis://127.0.0.1:<port>" URL. */
int th_proxy_port(const th_proxy *p);
const char *th_proxy_url(const th_proxy *p);
void th_proxy_late_reply_then_reset(th_proxy *p, const char *pat, int delay_ms);
/* The server's next reply on the connection of the next request containing
 * pat waits delay_ms, then is delivered there (the connection kept). It
 * fires when delivered, or when the client closes that connection first. */
void th_proxy_late_reply(th_proxy *p, const char *pat, int delay_ms);
void th_proxy_hold_request(th_proxy *p, const char *pat, int delay_ms);
void th_proxy_silence(th_proxy *p, int up, int down);
void th_proxy_stall_new(th_proxy *p, int on);
void th_proxy_refuse(th_proxy *p, int on);
void th_proxy_reset(th_proxy *p);
/* The live subscribers drop every byte in one direction or both from now
 * (up = requests lost, down = replies lost; (0, 0) ends it); connections
 * made later are not touched. How many there were. */
int th_proxy_silence_subscribers(th_proxy *p, int up, int down);
/* The live subscribers are reset (RST) both ways; how many. */
int th_proxy_reset_subscribers(th_proxy *p);
/* How many of the rules above have done what they say (the reply delivered
 * and the connection reset; the late reply delivered; the held request
 * delivered). */
int th_proxy_fired(th_proxy *p);
/* How many connections were accepted and stalled (th_proxy_stall_new). */
int th_proxy_stalled(th_proxy *p);
/* Stop: every connection closed, every thread joined. NULL is fine. */
void th_proxy_stop(th_proxy *p);

#endif
