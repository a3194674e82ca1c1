/* Random (version 4) UUIDs for client ids, from the kernel's random source.
 * Used by the client and by the Lua module (proto.uuid). */
#ifndef HILOCK_UUID_H
#define HILOCK_UUID_H

#define HL_UUID_LEN 36

/* Write a canonical lowercase UUID v4 and a NUL into out (37 bytes).
 * 0, or -1 when no random bytes could be read (out is then "" ). */
__attribute__((visibility("hidden"))) int hl_uuid4(char out[HL_UUID_LEN + 1]);

#endif
