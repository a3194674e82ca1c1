/* Random (version 4) UUIDs without libuuid: 16 bytes from getrandom(2)
 * (falling back to /dev/urandom), version and variant bits set as RFC 9562
 * says, printed in the canonical 8-4-4-4-12 lowercase form. */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <sys/random.h>
#include <sys/types.h>
#include <unistd.h>

#include "proto.h"

static int fill_random(unsigned char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom(buf + got, n - got, 0);
        if (r > 0)
            got += (size_t)r;
        else if (r < 0 && errno == EINTR)
            continue;
        else
            break; /* ENOSYS (old kernel), seccomp, ... */
    }
    if (got == n)
        return 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r > 0)
            got += (size_t)r;
        else if (r < 0 && errno == EINTR)
            continue;
        else
            break;
    }
    close(fd);
    return got == n ? 0 : -1;
}

int hl_uuid4(char out[HL_UUID_LEN + 1])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char b[16];
    size_t k = 0;

    out[0] = '\0';
    if (fill_random(b, sizeof b) != 0)
        return -1;
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40); /* version 4 */
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80); /* variant 10xx */
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            out[k++] = '-';
        out[k++] = hex[b[i] >> 4];
        out[k++] = hex[b[i] & 0x0f];
    }
    out[k] = '\0';
    return 0;
}
