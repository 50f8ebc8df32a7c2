package facts_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
			w.pluginPod("trident", "trident-csi-ok", "csi-ok")
			w.pod("trident", "trident-controller-x", "csi-ok", map[string]string{"app": "controller.csi.trident.netapp.io"})
		},
		node: "csi-ok", targetFound: true, csiNode: true, registered: true,
		drivers: []string{facts.DefaultDriverName}, pluginPods: []string{"trident-csi-ok"},
	}, {
		name: "driver deregistered while the plugin pod runs",
		setup: func() {
			w.node("csi-lost", nodeSpec{ready: corev1.ConditionTrue, renewedAgo: time.Second})
			w.csiNode("csi-lost", "ebs.csi.aws.com")
			w.pluginPod("trident", "trident-csi-lost", "csi-lost")
			w.pluginPod("trident", "trident-csi-other", "csi-ok")
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
			require.Equal(t, tc.targetFound, f.Target.Found, "target = %+v", f.Target)
			require.Equal(t, tc.node, f.Target.Node, "target = %+v", f.Target)
			require.NotNil(t, f.Node, "node facts")
			require.Equal(t, tc.node, f.Node.Name, "node facts = %+v", f.Node)
			if !tc.targetFound {
				assert.Equal(t, "Node "+tc.node+" not found", f.Target.Message, "missing node: message")
				assert.Nil(t, f.CSI, "missing node: csi facts")
				return
			}
			assert.Equal(t, v1alpha1.NodeHealthy, f.Node.State, "node state (%s)", f.Node.StateReason)
			c := f.CSI
			require.NotNil(t, c, "csi facts")
			assert.Equal(t, tc.csiNode, c.CSINodeExists, "csi facts = %+v", c)
			assert.Equal(t, tc.registered, c.DriverRegistered, "csi facts = %+v", c)
			assert.Equal(t, tc.drivers, c.Drivers, "csi facts = %+v", c)
			var pods []string
			for _, p := range c.PluginPods {
				pods = append(pods, p.Name)
				assert.True(t, p.Ready, "plugin pod facts = %+v", p)
				assert.Equal(t, string(corev1.PodRunning), p.Phase, "plugin pod facts = %+v", p)
				assert.Nil(t, p.DeletionTimestamp, "plugin pod facts = %+v", p)
			}
			assert.Equal(t, tc.pluginPods, pods, "plugin pods")
		})
	}
}
