package fulfiller.helpers

read_only if input.method in {"tools/list", "resources/read"}
