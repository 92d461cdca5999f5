package stats

import (
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
)

// Summary puts a node's figures and its pods' together as /stats/summary
// answers them. The pods are never null in JSON: clients see an empty list
// on a node without pods, as from the kubelet.
func Summary(node statsv1alpha1.NodeStats, pods []statsv1alpha1.PodStats) *statsv1alpha1.Summary {
	if pods == nil {
		pods = []statsv1alpha1.PodStats{}
	}
	return &statsv1alpha1.Summary{Node: node, Pods: pods}
}

// CPUAndMemory returns the part of s that /stats/summary answers with
// only_cpu_and_memory=true (what metrics-server and the resource metrics
// use): references, start times, CPU, memory and swap of the node, its
// system containers, the pods and their containers. s is not changed.
func CPUAndMemory(s *statsv1alpha1.Summary) *statsv1alpha1.Summary {
	node := statsv1alpha1.NodeStats{
		NodeName:  s.Node.NodeName,
		StartTime: s.Node.StartTime,
		CPU:       s.Node.CPU,
		Memory:    s.Node.Memory,
		Swap:      s.Node.Swap,
	}
	for _, c := range s.Node.SystemContainers {
		node.SystemContainers = append(node.SystemContainers, containerCPUAndMemory(c))
	}
	pods := make([]statsv1alpha1.PodStats, 0, len(s.Pods))
	for _, p := range s.Pods {
		pod := statsv1alpha1.PodStats{
			PodRef:    p.PodRef,
			StartTime: p.StartTime,
			CPU:       p.CPU,
			Memory:    p.Memory,
			Swap:      p.Swap,
		}
		for _, c := range p.Containers {
			pod.Containers = append(pod.Containers, containerCPUAndMemory(c))
		}
		pods = append(pods, pod)
	}
	return &statsv1alpha1.Summary{Node: node, Pods: pods}
}

func containerCPUAndMemory(c statsv1alpha1.ContainerStats) statsv1alpha1.ContainerStats {
	return statsv1alpha1.ContainerStats{Name: c.Name, StartTime: c.StartTime, CPU: c.CPU, Memory: c.Memory, Swap: c.Swap}
}
