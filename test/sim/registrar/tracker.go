package registrar

// Pod is what the Tracker needs to know about one node-plugin pod.
type Pod struct {
	// UID tells a recreated pod from the old one of the same name.
	UID string
	// Name is namespace/name, for log lines.
	Name string
	// Node is spec.nodeName; empty while the pod is unscheduled.
	Node string
	// Running is status.phase == Running: its containers, the registrar among them, started.
	Running bool
	// Ready is Running with the Ready condition True.
	Ready bool
	// Terminating is a set deletionTimestamp: kubelet has sent SIGTERM to its containers.
	Terminating bool
}

// Intent is what a node's CSINode should say about the driver.
type Intent int

const (
	// IntentNone leaves the CSINode alone: no node-plugin pod event for that node yet.
	IntentNone Intent = iota
	// IntentAdopt registers the driver only if the node has no CSINode yet. It comes from
	// pods that were already Ready when the simulator started: their registration may be
	// from before a restart of the simulator, or may have been removed by the bug since, and
	// a restart must neither hide nor heal the bug.
	IntentAdopt
	// IntentRegister lists the driver, creating the CSINode if needed.
	IntentRegister
	// IntentDeregister removes the driver from the CSINode.
	IntentDeregister
)

func (i Intent) String() string {
	switch i {
	case IntentNone:
		return "None"
	case IntentAdopt:
		return "Adopt"
	case IntentRegister:
		return "Register"
	case IntentDeregister:
		return "Deregister"
	}
	return "Intent(?)"
}

// Transition is one registration event on a node, caused by one pod.
type Transition struct {
	Intent Intent
	Node   string
	Pod    string
}

type podRecord struct {
	node string
	// started: the pod was seen Running, so its registrar ran and will remove the socket
	// when it terminates.
	started bool
	ready   bool
	// terminated: its deregistration was already emitted; the final delete adds nothing.
	terminated bool
}

// Tracker turns node-plugin pod observations into per-node intents. It is not safe for
// concurrent use; Run serialises calls.
type Tracker struct {
	pods  map[string]*podRecord
	nodes map[string]Intent
}

// NewTracker returns an empty Tracker.
func NewTracker() *Tracker {
	return &Tracker{pods: map[string]*podRecord{}, nodes: map[string]Intent{}}
}

// Intent returns the current intent for node.
func (t *Tracker) Intent(node string) Intent { return t.nodes[node] }

// Observe records the current state of a pod (an informer add or update) and returns the
// registration events it causes. initial marks pods from the informer's initial list, which
// were there before the simulator started.
func (t *Tracker) Observe(p Pod, initial bool) []Transition {
	rec := t.pods[p.UID]
	if rec == nil {
		rec = &podRecord{}
		t.pods[p.UID] = rec
	}
	if p.Node == "" {
		return nil
	}
	rec.node = p.Node
	rec.started = rec.started || p.Running
	if p.Terminating {
		return t.terminate(rec, p)
	}
	becameReady := p.Ready && !rec.ready
	rec.ready = p.Ready
	if !becameReady {
		return nil
	}
	if initial {
		// A Deregister from another pod in the same initial list wins: the socket is gone.
		if t.nodes[p.Node] == IntentNone {
			t.nodes[p.Node] = IntentAdopt
		}
		return []Transition{{Intent: IntentAdopt, Node: p.Node, Pod: p.Name}}
	}
	// The registrar of a pod that just started registers, whatever other pods do.
	t.nodes[p.Node] = IntentRegister
	return []Transition{{Intent: IntentRegister, Node: p.Node, Pod: p.Name}}
}

// Forget records that a pod was deleted (an informer delete, p being its last known state)
// and returns the registration events it causes.
func (t *Tracker) Forget(p Pod) []Transition {
	rec := t.pods[p.UID]
	if rec == nil {
		// The informer only deletes what it delivered before: nothing to undo.
		return nil
	}
	delete(t.pods, p.UID)
	if rec.node == "" {
		rec.node = p.Node
	}
	if rec.node == "" {
		return nil
	}
	rec.started = rec.started || p.Running
	// A pod deleted without a graceful phase we saw (grace period 0, or a missed event) was
	// still SIGTERMed first.
	return t.terminate(rec, p)
}

func (t *Tracker) terminate(rec *podRecord, p Pod) []Transition {
	rec.ready = false
	if rec.terminated || !rec.started {
		// Already accounted for, or the registrar never ran and has no socket to remove.
		return nil
	}
	rec.terminated = true
	// Seed B: any terminating node-plugin pod's registrar removes the shared socket, even
	// when another plugin pod on the node is Running and registered.
	t.nodes[rec.node] = IntentDeregister
	return []Transition{{Intent: IntentDeregister, Node: rec.node, Pod: p.Name}}
}
