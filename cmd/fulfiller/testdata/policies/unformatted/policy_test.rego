package fulfiller_test

import data.fulfiller

test_lists if fulfiller.decision.action=="fulfill" with input as {"method": "tools/list"}
