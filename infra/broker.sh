#!/usr/bin/env bash
# Start, stop or query the local Tansu broker for development: infra/broker.sh start|stop|status [PORT]
# (PORT defaults to 9092). Pid and log files live in ${CAUCUS_RUN_DIR:-./.run}. All logic, including the
# check that a pid really is our broker before it is signalled, is in infra/broker.py.
# Python: $PYTHON if set, else the repository's .venv, else python3 on PATH.
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 start|stop|status [PORT]" >&2
    exit 2
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON:-}
if [ -z "$python" ]; then
    if [ -x "$root/.venv/bin/python" ]; then python="$root/.venv/bin/python"; else python=python3; fi
fi
export CAUCUS_RUN_DIR="${CAUCUS_RUN_DIR:-./.run}"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
exec "$python" -m infra.broker "$@"
