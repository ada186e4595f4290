#!/usr/bin/env bash
# Sourced by the test bed's steps: apt_get waits for an install another process is running instead of failing.
# The fleet lane's playbooks install packages on this machine (HAProxy for the lab's load balancer) while the other
# lane's test bed installs its own. `install` waits through DPkg::Lock::Timeout; `update` does not honour it
# (apt 2.6), so a run that could not get a lock is retried, for up to 10 minutes.
apt_get() {
  local err tries=0
  err=$(mktemp)
  until apt-get -o DPkg::Lock::Timeout=600 "$@" 2>"$err"; do
    if ! grep -q "Could not get lock" "$err" || [ "$((tries += 1))" -ge 120 ]; then
      cat "$err" >&2
      rm -f "$err"
      return 100
    fi
    echo "testbed: apt-get $1 waits for another install ($(grep -m1 -o 'held by process.*' "$err" || echo 'lock held'))" >&2
    sleep 5
  done
  grep -v "^$" "$err" >&2 || true
  rm -f "$err"
}
