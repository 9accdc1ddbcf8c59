#!/bin/sh
# A go command whose build never ends and runs a child, as go build runs
# the compilers (TestBuildCancel). env and list answer as for an empty
# package.
case "$1" in
env) printf 'go1.26\nlinux\namd64\n0\n\n\n%s/go.mod\n' "$PWD" ;;
list) printf '{"ImportPath": "slow", "Dir": "%s"}\n' "$PWD" ;;
build)
	sleep 60 &
	echo $! > "$SLOWGO_PIDFILE"
	wait
	;;
esac
