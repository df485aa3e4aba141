package fulfiller

decision := {"action": "fulfill"}
