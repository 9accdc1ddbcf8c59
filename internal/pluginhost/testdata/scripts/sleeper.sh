#!/bin/sh
# Not a plugin: it never prints a handshake line, and its child keeps the
# stdout pipe open after the shell is killed (TestStartTimeoutChild).
sleep 60 &
echo $! > "$SLEEPER_PIDFILE"
wait
