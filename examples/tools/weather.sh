#!/bin/sh
# A command tool for examples/weather-tool.yaml: reads the call's arguments (JSON) on stdin and
# prints the result on stdout. A real tool would call a weather service; this one answers from
# the city it was asked about, so the example runs offline.
read -r arguments
city=$(printf '%s' "$arguments" | sed -n 's/.*"city" *: *"\([^"]*\)".*/\1/p')
if [ -z "$city" ]; then
  echo "no city in the arguments: $arguments" >&2
  exit 2
fi
printf '{"city":"%s","forecast":"sunny","temperature_c":21}\n' "$city"
