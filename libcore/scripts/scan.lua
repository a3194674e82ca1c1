-- One step of a SCAN over the node that serves KEYS[1] (the key only picks
-- the node: on a cluster each master is scanned through a key of one of its
-- slots; nothing is read from it), for hilock_scan_names and `hilock status
-- PATTERN`. Reads only.
-- ARGV[1] cursor, ARGV[2] glob pattern (MATCH), ARGV[3] COUNT hint.
-- Returns {next cursor, {keys...}}.
return redis.call('scan', ARGV[1], 'match', ARGV[2], 'count', ARGV[3])
