// Package remediations owns acting: playbooks as data (playbooks.yaml), the step
// library they name, the gate and safety floor checked before every destructive step
// on fresh facts (read through FreshReader, which the controller implements), and the
// runner that advances a playbook one journaled step per reconcile, so that a restart
// resumes without repeating a destructive call. The floor is Go, not CUE, so that no
// policy can lift it.
package remediations
