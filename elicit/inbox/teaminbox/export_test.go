package teaminbox

import "github.com/mewkit/fulfiller/elicit/approver"

// SetTamper makes the server change each answer after its passkey signed
// it, as a compromised inbox would.
func (s *Server) SetTamper(f func(*approver.Answer)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tamper = f
}
