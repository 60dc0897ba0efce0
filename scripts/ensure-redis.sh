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
