package certs

import (
	"crypto/x509"
	"errors"
	"fmt"
	"time"
)

// Policy is what the planner aims for.
type Policy struct {
	// DNSNames the serving pair covers: the Service's
	// <name>.<namespace>.svc, which the aggregator verifies.
	DNSNames []string
	// CAValidity and ServingValidity are the lifetimes of new certificates.
	CAValidity, ServingValidity time.Duration
	// Propagation bounds the time from a Secret change to every serving
	// replica serving from it, and from a caBundle change to the aggregator
	// verifying with it: for a Secret volume, the kubelet's sync period and
	// cache TTL plus the server's file check.
	Propagation time.Duration
}

// Validate says what makes the policy unsafe: each certificate must outlive
// the changes that replace it.
func (p Policy) Validate() []error {
	var errs []error
	if len(p.DNSNames) == 0 {
		errs = append(errs, errors.New("the serving certificate needs at least one DNS name"))
	}
	if p.Propagation <= 0 {
		errs = append(errs, fmt.Errorf("propagation delay must be positive, got %s", p.Propagation))
	}
	// A pair is replaced when a third of its life remains and may be served
	// for Propagation after that.
	if p.ServingValidity < 3*p.Propagation {
		errs = append(errs, fmt.Errorf("serving certificate validity %s must be at least 3 × the propagation delay %s", p.ServingValidity, p.Propagation))
	}
	// A CA is replaced when a third of its life remains, then takes one
	// Propagation to sign and another until its pairs are served.
	if p.CAValidity < 6*p.Propagation {
		errs = append(errs, fmt.Errorf("CA validity %s must be at least 6 × the propagation delay %s", p.CAValidity, p.Propagation))
	}
	if p.ServingValidity > p.CAValidity/3 {
		errs = append(errs, fmt.Errorf("serving certificate validity %s must be at most a third of the CA validity %s", p.ServingValidity, p.CAValidity))
	}
	return errs
}

// Plan returns the state that follows s at now, and what it changed, in
// words, for the log. trusted says whether every managed APIService holds
// s.Bundle(). Plan is idempotent: planning its result again at the same
// time changes nothing.
func Plan(s State, now time.Time, p Policy, trusted bool) (State, []string, error) {
	var did []string
	s.Previous = append([]*x509.Certificate(nil), s.Previous...)

	// Keep trusting the CA of the published pair, even one the CA Secret no
	// longer holds (recreated, or its key lost): replicas serve that pair
	// until a new one reaches them.
	published := s.Serving != nil && now.Before(s.Serving.Cert.NotAfter)
	if published {
		for _, ca := range s.ServingCAs {
			if signedBy(s.Serving.Cert, ca) && !s.trusts(ca) {
				s.Previous = append(s.Previous, ca)
				did = append(did, "kept trusting the CA of the published serving certificate")
			}
		}
	}

	if s.Active != nil && !now.Before(s.Active.Cert.NotAfter) {
		s.Active = nil
		did = append(did, "dropped the expired CA")
	}
	if s.Next != nil && !now.Before(s.Next.Cert.NotAfter) {
		s.Next, s.NextTrustedSince = nil, time.Time{}
	}
	s, retired := s.retire(now)
	if retired > 0 {
		did = append(did, fmt.Sprintf("stopped trusting %d CA(s) no published certificate needs", retired))
	}

	// A CA to sign with. Where a valid pair of another CA is published, the
	// new CA must be trusted before it signs.
	if s.Active == nil && s.Next == nil {
		ca, err := NewAuthority(now, p.CAValidity)
		if err != nil {
			return s, did, err
		}
		if published {
			s.Next = ca
			did = append(did, "made a new CA, trusted before it signs")
		} else {
			s.Active = ca
			did = append(did, "made a new CA")
		}
	}
	if s.Active != nil && s.Next == nil && !now.Before(renewAt(s.Active.Cert)) {
		ca, err := NewAuthority(now, p.CAValidity)
		if err != nil {
			return s, did, err
		}
		s.Next = ca
		did = append(did, "made the next CA, trusted before it signs (the CA expires "+s.Active.Cert.NotAfter.UTC().Format(time.RFC3339)+")")
	}
	if s.Next != nil {
		switch {
		case s.NextTrustedSince.IsZero() && trusted:
			s.NextTrustedSince = now
			did = append(did, "every APIService trusts the next CA")
		case !s.NextTrustedSince.IsZero() && !now.Before(s.NextTrustedSince.Add(p.Propagation)):
			if s.Active != nil {
				s.Previous = append(s.Previous, s.Active.Cert)
			}
			s.Active, s.Next, s.NextTrustedSince = s.Next, nil, time.Time{}
			did = append(did, "the next CA signs from now on")
		}
	}

	if s.Active != nil {
		if why := s.reissue(now, p); why != "" {
			old := s.Serving
			pair, err := s.Active.Issue(p.DNSNames, now, p.ServingValidity)
			if err != nil {
				return s, did, err
			}
			s.Serving = pair
			if old != nil && now.Before(old.Cert.NotAfter) && !signedBy(old.Cert, s.Active.Cert) {
				// The old pair is served until the new one reaches every
				// replica.
				if until := now.Add(p.Propagation); until.After(s.PreviousUntil) {
					s.PreviousUntil = until
				}
			}
			did = append(did, "issued a serving certificate: "+why)
		}
	}
	if len(s.Previous) == 0 {
		s.PreviousUntil = time.Time{}
	}
	s.ServingCAs = s.Trusted()
	return s, did, nil
}

// retire drops the Previous CAs that have expired, and once PreviousUntil
// has passed those that did not sign the published pair.
func (s State) retire(now time.Time) (State, int) {
	var keep []*x509.Certificate
	for _, c := range s.Previous {
		switch {
		case !now.Before(c.NotAfter):
		case !s.PreviousUntil.IsZero() && !now.Before(s.PreviousUntil) &&
			(s.Serving == nil || !signedBy(s.Serving.Cert, c)):
		default:
			keep = append(keep, c)
		}
	}
	n := len(s.Previous) - len(keep)
	s.Previous = keep
	return s, n
}

// reissue says why the serving pair must be replaced, or "".
func (s State) reissue(now time.Time, p Policy) string {
	switch c := s.Serving; {
	case c == nil:
		return "none published"
	case !signedBy(c.Cert, s.Active.Cert):
		return "signed by another CA"
	case !coversAll(c.Cert, p.DNSNames):
		return fmt.Sprintf("does not cover %v", p.DNSNames)
	case !now.Before(renewAt(c.Cert)):
		return "a third of its life remains (expires " + c.Cert.NotAfter.UTC().Format(time.RFC3339) + ")"
	}
	return ""
}

func (s State) trusts(c *x509.Certificate) bool {
	for _, t := range s.Trusted() {
		if t.Equal(c) {
			return true
		}
	}
	return false
}

// NextChange is the earliest time after now at which Plan would change s
// without anything else changing.
func (s State) NextChange(now time.Time, p Policy) time.Time {
	var times []time.Time
	if s.Serving != nil {
		times = append(times, renewAt(s.Serving.Cert), s.Serving.Cert.NotAfter)
	}
	if s.Active != nil {
		times = append(times, renewAt(s.Active.Cert), s.Active.Cert.NotAfter)
	}
	if !s.NextTrustedSince.IsZero() {
		times = append(times, s.NextTrustedSince.Add(p.Propagation))
	}
	if !s.PreviousUntil.IsZero() {
		times = append(times, s.PreviousUntil)
	}
	for _, c := range s.Previous {
		times = append(times, c.NotAfter)
	}
	var next time.Time
	for _, t := range times {
		if t.After(now) && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	return next
}
