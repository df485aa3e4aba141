package fulfiller

default decision := {"action":"reject","reason":"policy"}

decision := {"action": "fulfill"} if {
    input.method == "tools/list"
}
