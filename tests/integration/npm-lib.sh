# npm packages for the tests that hold sbx to the reference SDK's JavaScript code: the Agents
# SDK (@openai/agents), the OpenAI client library it brings (its request types come from the
# API's OpenAPI document) and TypeScript, pinned, installed once into
# ${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm}/agents-js-VERSION. Source after lib.sh.
AGENTS_JS_VERSION=0.20.0
AGENTS_JS_PKGS="@openai/agents@$AGENTS_JS_VERSION openai@7.59.0 typescript@5.9.3"

# agents_js: export AGENTS_JS_DIR (its node_modules holds the packages), or skip the whole test
# saying why.
agents_js() {
    command -v node >/dev/null && command -v npm >/dev/null || skip_all "node or npm is missing"
    local cache=${SBX_TEST_NPM_CACHE:-/tmp/sbx-test-npm}
    AGENTS_JS_DIR="$cache/agents-js-$AGENTS_JS_VERSION"
    export AGENTS_JS_DIR
    have_agents_js() {
        [ "$(node -p "require('$AGENTS_JS_DIR/node_modules/@openai/agents/package.json').version" 2>/dev/null)" = "$AGENTS_JS_VERSION" ] &&
            [ -x "$AGENTS_JS_DIR/node_modules/.bin/tsc" ]
    }
    have_agents_js && return 0
    mkdir -p "$AGENTS_JS_DIR"
    # One installer at a time: tests run in parallel.
    # shellcheck disable=SC2086
    if ! (
        flock 9
        have_agents_js || npm install --prefix "$AGENTS_JS_DIR" --no-audit --no-fund --loglevel=error \
            $AGENTS_JS_PKGS >"$T/npm.log" 2>&1
    ) 9>"$AGENTS_JS_DIR.lock"; then
        skip_all "npm cannot install $AGENTS_JS_PKGS: $(tail -1 "$T/npm.log" 2>/dev/null)"
    fi
    have_agents_js || skip_all "npm did not install $AGENTS_JS_PKGS"
}
