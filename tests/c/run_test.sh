#!/usr/bin/env bash
# Run one C test executable; under valgrind memcheck when HILOCK_VALGRIND=1.
if [ "${HILOCK_VALGRIND:-0}" = 1 ]; then
  exec valgrind --quiet --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect,possible \
    --errors-for-leak-kinds=definite,indirect,possible --track-fds=no \
    --suppressions="$(dirname "$0")/valgrind.supp" "$@"
fi
exec "$@"
