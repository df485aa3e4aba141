# Fulfils every call with input.tool as its message, so that a test sees
# the tool exactly as the policy did.
package fulfiller

decision := {"action": "fulfill", "message": json.marshal(input.tool)}
