package facts_test

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/remediator/remediator/api/v1alpha1"
	"github.com/remediator/remediator/controllers/facts"
)

func TestGatherCSIFacts(t *testing.T) {
	w := newWorld(t)
	cases := []struct {
		name        string
		setup       func()
		node        string
		csiNode     bool
		registered  bool
		drivers     []string
		pluginPods  []string
		targetFound bool
	}{{
		name: "driver registered",
		setup: func() {
			w.node("csi-ok", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
			w.csiNode("csi-ok", facts.DefaultDriverName)
			w.pod("trident", "trident-csi-ok", "csi-ok", pluginLabels)
			w.pod("trident", "trident-controller-x", "csi-ok", map[string]string{"app": "controller.csi.trident.netapp.io"})
		},
		node: "csi-ok", targetFound: true, csiNode: true, registered: true,
		drivers: []string{facts.DefaultDriverName}, pluginPods: []string{"trident-csi-ok"},
	}, {
		name: "driver deregistered while the plugin pod runs",
		setup: func() {
			w.node("csi-lost", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
			w.csiNode("csi-lost", "ebs.csi.aws.com")
			w.pod("trident", "trident-csi-lost", "csi-lost", pluginLabels)
			w.pod("trident", "trident-csi-other", "csi-ok", pluginLabels)
		},
		node: "csi-lost", targetFound: true, csiNode: true, registered: false,
		drivers: []string{"ebs.csi.aws.com"}, pluginPods: []string{"trident-csi-lost"},
	}, {
		name:        "no CSINode",
		setup:       func() { w.node("csi-none", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second}) },
		node:        "csi-none",
		targetFound: true,
	}, {
		name:  "node missing",
		setup: func() {},
		node:  "csi-ghost",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w.t = t
			tc.setup()
			f := w.gather(t, v1alpha1.RemediationReregisterCSIDriver, v1alpha1.Target{Node: tc.node})
			if f.Target.Found != tc.targetFound || f.Target.Node != tc.node {
				t.Fatalf("target = %+v", f.Target)
			}
			if f.Node == nil || f.Node.Name != tc.node {
				t.Fatalf("node facts = %+v", f.Node)
			}
			if !tc.targetFound {
				if f.Target.Message != "Node "+tc.node+" not found" || f.CSI != nil {
					t.Errorf("missing node: message %q, csi %+v", f.Target.Message, f.CSI)
				}
				return
			}
			if f.Node.State != v1alpha1.NodeHealthy {
				t.Errorf("node state = %s (%s)", f.Node.State, f.Node.StateReason)
			}
			c := f.CSI
			if c.CSINodeExists != tc.csiNode || c.DriverRegistered != tc.registered || !slices.Equal(c.Drivers, tc.drivers) {
				t.Errorf("csi facts = %+v", c)
			}
			var pods []string
			for _, p := range c.PluginPods {
				pods = append(pods, p.Name)
				if !p.Ready || p.Phase != string(corev1.PodRunning) || p.DeletionTimestamp != nil {
					t.Errorf("plugin pod facts = %+v", p)
				}
			}
			if !slices.Equal(pods, tc.pluginPods) {
				t.Errorf("plugin pods = %v, want %v", pods, tc.pluginPods)
			}
		})
	}
}
