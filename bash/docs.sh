#!/usr/bin/env bash
# Builds the user guide (mkdocs.yml, docs/) into site/ with --strict: a broken link, a page
# missing from the nav or a nav entry without its page fails the build (.ci/run runs it).
#   bash bash/docs.sh              build (site/ is git-ignored)
#   .venv/bin/mkdocs serve         the guide at http://127.0.0.1:8000 while you edit it
# The commands the pages show are run by tests/test_docs.py.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
exec "$VENV/bin/mkdocs" build --strict --quiet "$@"
