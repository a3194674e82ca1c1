/* A program built against an installed hilock, via CMake or pkg-config. */
#include <hilock.h>
#include <stdio.h>

int main(void)
{
    if (hilock_version() != HILOCK_VERSION_NUMBER) {
        fprintf(stderr, "header %d, library %d\n", HILOCK_VERSION_NUMBER, hilock_version());
        return 1;
    }
    printf("hilock %s: %s\n", hilock_version_string(), hilock_strerror(HILOCK_ENOTOWNER));
    return 0;
}
