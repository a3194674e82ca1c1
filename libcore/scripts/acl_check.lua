-- Open-time permission check (hilock_client_open), run with EVAL, so EVAL
-- itself is checked by running it. Asks the server whether this ACL user
-- may publish and subscribe on the unlock channels, without doing either.
-- ARGV[1] a probe channel (redisson_lock__channel:{...}), ARGV[2] the
-- publish command (publish/spublish), ARGV[3] the subscribe command
-- (subscribe/ssubscribe). Returns "ok", or the name of a refused command.
if not redis.acl_check_cmd then
    return 'ok' -- before Redis 7: no per-command check to ask for
end
if not redis.acl_check_cmd(ARGV[2], ARGV[1], '0') then
    return ARGV[2]
end
if not redis.acl_check_cmd(ARGV[3], ARGV[1]) then
    return ARGV[3]
end
return 'ok'
