/* hilock_inspect: the API over the inspection script (proto_inspect.c). */
#include <stdio.h>
#include <string.h>

#include "api.h"


static int inspect_fail(hilock_client *c, int rc, const char *msg)
{
    const char *m = msg && *msg ? msg : hilock_strerror(rc);
    hl_client_set_err(c, m);
    hl_err_note(c, m);
    return rc;
}

int hilock_inspect(hilock_lock_info **out, hilock_client *c, const char *name)
{
    if (!out)
        return HILOCK_EINVAL;
    *out = NULL;
    if (!c)
        return HILOCK_EINVAL;
    char err[HL_ERRMSG_MAX] = "";
    if (hl_name_check(name, name ? strlen(name) : 0, err, sizeof err))
        return inspect_fail(c, HILOCK_EINVAL, err);
    int rc = hl_client_check(c, err);
    if (rc)
        return inspect_fail(c, rc, err);
    hl_names n;
    if ((rc = hl_names_init(&n, name)) != 0)
        return inspect_fail(c, rc, NULL);
    if (c->t.ep.cluster && !hl_names_one_slot(&n)) {
        hl_names_free(&n);
        return inspect_fail(c, HILOCK_EINVAL,
                            "lock name has an empty or unclosed hash tag ('{}', 'x{y'): "
                            "on a cluster its companion keys are in another slot");
    }
    hl_sem_names sn;
    if ((rc = hl_sem_names_init(&sn, HL_SEM_PERMIT, name)) != 0) {
        hl_names_free(&n);
        return inspect_fail(c, rc, NULL);
    }
    hl_cmd cmd;
    hl_cmd_inspect(&cmd, &n, sn.timeout);
    redisReply *reply = NULL;
    rc = hl_exec(&c->t, &cmd, &reply, 0, err);
    if (rc == 0) {
        rc = hl_decode_inspect(reply, name, out, err);
        freeReplyObject(reply);
    }
    hl_sem_names_free(&sn);
    hl_names_free(&n);
    if (rc)
        return inspect_fail(c, rc, err);
    hl_err_forget(c);
    return 0;
}

void hilock_lock_info_free(hilock_lock_info *info)
{
    hl_info_free(info);
}

const char *hilock_info_kind_name(hilock_info_kind kind)
{
    return hl_info_kind_name(kind);
}
