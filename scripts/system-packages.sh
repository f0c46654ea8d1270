#!/usr/bin/env bash
# Install the Debian packages listed in scripts/system-packages.txt whose command
# is missing. As root this uses apt-get; otherwise it names the command to run.
set -euo pipefail
cd "$(dirname "$0")"
missing=()
while read -r command package; do
  case "$command" in ''|'#'*) continue ;; esac
  command -v "$command" >/dev/null 2>&1 || missing+=("$package")
done < system-packages.txt
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "setup: installing system packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  log=$(mktemp)
  if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
    echo "setup: apt-get could not install ${missing[*]}; its last lines:" >&2
    tail -n 20 "$log" >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
else
  echo "setup: missing system packages: ${missing[*]}" >&2
  echo "setup: install them with: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi
