// Command chaos runs the reliability campaigns of docs/reliability.md on the local
// cluster (test/cluster), against bin/remediator-failpoints:
//
//	R1 crash:  SIGKILL at every step boundary of every playbook (failpoints) and at
//	           random moments, then restart;
//	R2 faults: the controller talks to the API server through test/faultproxy (5xx,
//	           timeouts before and after the server acted, conflicts, cut watches);
//	R4 churn:  requests created and deleted while two leader-electing replicas are
//	           killed and restarted.
//
// Every destructive call is counted from the kube-apiserver's audit log, never from
// the controller's logs. The command exits non-zero on any violation: a wrong
// terminal state, an unsafe Lease delete, a destructive call that ran twice, a node
// left cordoned or a finalizer left behind.
//
//	go -C test/harness run ./chaos -preset full -out docs/reliability   (make chaos)
//	go -C test/harness run ./chaos -preset smoke                         (make chaos-smoke, in make test)
package main
