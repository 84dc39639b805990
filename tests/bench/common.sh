# shellcheck shell=bash
# What the bench scripts share, sourced at their top: a scratch directory `$work` removed on
# exit together with the daemon (`$daemon_pid`) and nats-server (`$server_pid`) the script
# started, a free loopback port, a private JetStream server, and a process's CPU seconds.
# A script with more to undo on exit defines `cleanup_more` after sourcing this.

work=$(mktemp -d)
server_pid=""
daemon_pid=""
cleanup_more() { :; }
cleanup() {
  if [ -n "$daemon_pid" ]; then kill "$daemon_pid" 2>/dev/null || true; fi
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
  cleanup_more
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# CPU seconds (user + system) a process has used so far, from /proc: they hold on a shared
# machine where wall time does not.
cpu() { awk -v t="$(getconf CLK_TCK)" '{sub(/.*\) /, ""); print ($12 + $13) / t}' "/proc/$1/stat"; }

# start_nats PORT DIR: a private nats-server with JetStream storing under DIR, on PORT
# (one started before by the script is stopped first); returns once the port accepts.
start_nats() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  nats-server -a 127.0.0.1 -p "$1" -js -sd "$2" >/dev/null 2>&1 &
  server_pid=$!
  until (: >"/dev/tcp/127.0.0.1/$1") 2>/dev/null; do
    kill -0 "$server_pid" 2>/dev/null || { echo "nats-server did not start on port $1" >&2; exit 1; }
    sleep 0.05
  done
}
