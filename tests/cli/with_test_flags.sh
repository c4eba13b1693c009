#!/bin/sh
# Runs onnx-pipetrain ($PIPETRAIN_TEST_BIN) with the test-only flags in $PIPETRAIN_TEST_FLAGS
# before the test's own arguments (separate_host_cli_tests: --test-separate-host), so that a test
# file runs unchanged with and without them.
exec "$PIPETRAIN_TEST_BIN" $PIPETRAIN_TEST_FLAGS "$@"
