#!/usr/bin/env bash
# `make demo`: start the real stack in the background and print where to look.
#   bash infra/demo.sh        start Kafka and Dagster (webserver + daemon)
#   bash infra/demo.sh stop   stop both
set -euo pipefail
cd "$(dirname "$0")/.."
ESP=.venv/bin/esp
RUN=.esp/run
PORT=${ESP_UI_PORT:-3000}
mkdir -p "$RUN"

terminate_runs() {
  # Stream runs live in their own process groups: end them through Dagster, at a batch boundary.
  local q='{"query":"{ runsOrError(filter: {statuses: [STARTED, STARTING, QUEUED]}) { ... on Runs { results { runId } } } }"}'
  for id in $(curl -sf -X POST -H 'Content-Type: application/json' "http://127.0.0.1:$PORT/graphql" -d "$q" \
      | grep -o '"runId":"[^"]*"' | cut -d'"' -f4); do
    curl -sf -X POST -H 'Content-Type: application/json' "http://127.0.0.1:$PORT/graphql" \
      -d "{\"query\":\"mutation { terminateRun(runId: \\\"$id\\\") { __typename } }\"}" > /dev/null && echo "run $id terminating"
  done
}

stop() {
  if [ -f "$RUN/dagster.pid" ] && kill -0 -- "-$(cat "$RUN/dagster.pid")" 2>/dev/null; then
    terminate_runs || true
    sleep 5
    group="-$(cat "$RUN/dagster.pid")"
    kill -INT -- "$group" 2>/dev/null || true
    for _ in $(seq 1 15); do kill -0 -- "$group" 2>/dev/null || break; sleep 1; done
    kill -KILL -- "$group" 2>/dev/null || true
    echo "Dagster stopped"
  fi
  rm -f "$RUN/dagster.pid"
  "$ESP" infra down
}

if [ "${1:-start}" = "stop" ]; then stop; exit 0; fi

"$ESP" infra up
if [ -f "$RUN/dagster.pid" ] && kill -0 "$(cat "$RUN/dagster.pid")" 2>/dev/null; then
  echo "Dagster already running (pid $(cat "$RUN/dagster.pid"))"
else
  # setsid: the UI keeps running after make returns; its own process group lets `stop` end it whole.
  setsid "$ESP" ui --port "$PORT" > "$RUN/dagster.log" 2>&1 < /dev/null &
  echo $! > "$RUN/dagster.pid"
fi
for _ in $(seq 1 120); do
  if curl -sf "http://127.0.0.1:$PORT/server_info" > /dev/null; then break; fi
  sleep 1
done
curl -sf "http://127.0.0.1:$PORT/server_info" > /dev/null || { echo "Dagster did not start; see $RUN/dagster.log"; exit 1; }

# The main job: the word-count stream, kept alive by its supervisor sensor, under the eSault trace.
"$ESP" topics create words -p 4
"$ESP" topics create ads -p 4
export DAGSTER_HOME="$PWD/$RUN/dagster"
DAGSTER=.venv/bin/dagster
for sensor in ${ESP_DEMO_SENSORS:-wordcount_supervisor wordcount_elasticity}; do
  "$DAGSTER" sensor start "$sensor" -w workspace.yaml > /dev/null 2>&1 && echo "sensor $sensor started" \
    || echo "sensor $sensor not available"
done
"$DAGSTER" job launch -j load_generator_job -w workspace.yaml --config-json \
  "{\"ops\": {\"generate_load\": {\"config\": {\"profile\": \"esault\", \"peak_rate\": ${ESP_DEMO_PEAK:-4000}, \"topic\": \"words\"}}}}" \
  > /dev/null && echo "eSault load launched (peak ${ESP_DEMO_PEAK:-4000} records/s)"

echo
echo "esp is running."
echo "  Dagster UI:  http://127.0.0.1:$PORT"
echo "  Kafka:       $("$ESP" infra status | grep -o '127.0.0.1:[0-9]*' | head -1)"
echo "  logs:        $RUN/dagster.log, $RUN/kafka/logs/server.log"
UI="http://127.0.0.1:$PORT"
echo "  watch:       Assets → wordcount_stream (live observations), Runs, Automation → sensors"
echo "  live plots:  $UI/assets/wordcount_stream?view=plots   (input, processed, lag, p99, channels)"
echo "  dashboard:   $UI/assets/wordcount_dashboard          (last hour PNG, every 5 min)"
echo "  health:      $UI/assets/wordcount_stream?view=checks  (slo, dead_letter_rate, freshness_check)"
echo "  decisions:   $UI/locations/esp/sensors/wordcount_elasticity   (each tick's reason cites the SLO)"
echo "  policy:      $UI/locations/esp/jobs/wordcount_set_policy_job/playground   (SLO, bounds, cooldown, on/off)"
echo "  stop:        $UI/locations/esp/jobs/wordcount_stop_job/playground   (start again: wordcount_stream_job)"
echo "  alerts:      $UI/assets/stream_alerts   (failed stream/resize runs; also $RUN/alerts.jsonl)"
echo "  terminal:    $ESP status"
echo "  stop with:   make demo-stop"
