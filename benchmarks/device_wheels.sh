# Sourced by the device-side scripts (verify_h200.sh, ab_tower.sh): install_wheels RUN STATUS
# installs the optional packages that travel as wheels in RUN/whl into /tmp/site (on
# PYTHONPATH in those scripts); a failure is appended to the STATUS file.
install_wheels() {
  local run=$1 status=$2
  if [ -d "$run/whl" ] && ls "$run"/whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site "$run"/whl/*.whl || echo "wheel install failed" | tee -a "$status"
  fi
}
