/*
 * libFuzzer target: the URL parser (hl_endpoint_parse) with any bytes.
 * Checks what a parsed endpoint promises: a TCP endpoint has a host and a
 * port in 1..65535, seeds have hosts and ports, and everything is freed.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    char *url = malloc(size + 1);
    if (!url)
        return 0;
    memcpy(url, data, size);
    url[size] = 0; /* the API takes a C string: stop at the first NUL */
    hl_endpoint ep;
    char err[HL_ERRMSG_MAX];
    err[0] = 0;
    int rc = hl_endpoint_parse(&ep, url, err);
    if (rc == 0) {
        if (!ep.path && !ep.nseeds &&
            (!ep.host || ep.port < 1 || ep.port > 65535))
            abort();
        for (int i = 0; i < ep.nseeds; i++)
            if (!ep.seed_hosts[i] || ep.seed_ports[i] < 1 || ep.seed_ports[i] > 65535)
                abort();
        if (ep.db < 0)
            abort();
        hl_endpoint_free(&ep);
    } else if (rc != HILOCK_EINVAL && rc != HILOCK_ENOMEM) {
        abort();
    } else if (!err[0] || !memchr(err, 0, sizeof err)) {
        abort(); /* every refusal says why */
    }
    free(url);
    return 0;
}
