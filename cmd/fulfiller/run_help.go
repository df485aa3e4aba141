package main

// runExamples is run's Example (run --help), run from the repository's
// root. TestRunHelpExamples runs every `fulfiller run` line of it with
// --check, so that each works as written.
const runExamples = `  # The example policies and their data; the token (the one of fulfiller's
  # entry in the gateway's space.yaml) from the environment, never a flag
  export FULFILLER_TOKEN="<fulfiller's token>"
  fulfiller run --gateway ws://127.0.0.1:8080 --policy examples/policies --data examples/policies/data.yaml

  # The same, checked without joining: exit 0, or 2 and what is wrong
  fulfiller run --gateway ws://127.0.0.1:8080 --policy examples/policies --data examples/policies/data.yaml --check

  # The annotated example config, the token from a file (mode 0600), the
  # decision log beside it
  fulfiller run --config examples/fulfiller.yaml --token-file fulfiller.token --decision-log decisions.jsonl

  # Try it without MEW: "fulfiller demo --hold" serves a gateway and prints
  # the run line to join it`
