package apiserver

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/metrics/pkg/apis/metrics"
)

// tableColumns are what `kubectl get podmetrics` and `kubectl get
// nodemetrics` print.
var tableColumns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the resource"},
	{Name: "CPU", Type: "string", Format: "", Description: "CPU usage, in cores"},
	{Name: "Memory", Type: "string", Format: "", Description: "Memory usage, in bytes"},
	{Name: "Window", Type: "string", Format: "", Description: "Interval the usage was measured over"},
}

func podTable(obj runtime.Object) (*metav1.Table, error) {
	t := &metav1.Table{ColumnDefinitions: tableColumns}
	switch o := obj.(type) {
	case *metrics.PodMetrics:
		t.Rows = []metav1.TableRow{podRow(o)}
	case *metrics.PodMetricsList:
		t.ResourceVersion, t.Continue = o.ResourceVersion, o.Continue
		t.Rows = make([]metav1.TableRow, len(o.Items))
		for i := range o.Items {
			t.Rows[i] = podRow(&o.Items[i])
		}
	default:
		return nil, fmt.Errorf("cannot make a table of %T", obj)
	}
	return t, nil
}

func podRow(m *metrics.PodMetrics) metav1.TableRow {
	var cpu, mem resource.Quantity
	for i := range m.Containers {
		u := m.Containers[i].Usage
		cpu.Add(u[corev1.ResourceCPU])
		mem.Add(u[corev1.ResourceMemory])
	}
	return row(m, m.Name, cpu, mem, m.Window.Duration.String())
}

func nodeTable(obj runtime.Object) (*metav1.Table, error) {
	t := &metav1.Table{ColumnDefinitions: tableColumns}
	switch o := obj.(type) {
	case *metrics.NodeMetrics:
		t.Rows = []metav1.TableRow{nodeRow(o)}
	case *metrics.NodeMetricsList:
		t.ResourceVersion, t.Continue = o.ResourceVersion, o.Continue
		t.Rows = make([]metav1.TableRow, len(o.Items))
		for i := range o.Items {
			t.Rows[i] = nodeRow(&o.Items[i])
		}
	default:
		return nil, fmt.Errorf("cannot make a table of %T", obj)
	}
	return t, nil
}

func nodeRow(m *metrics.NodeMetrics) metav1.TableRow {
	return row(m, m.Name, m.Usage[corev1.ResourceCPU], m.Usage[corev1.ResourceMemory], m.Window.Duration.String())
}

func row(obj runtime.Object, name string, cpu, mem resource.Quantity, window string) metav1.TableRow {
	return metav1.TableRow{
		Cells:  []any{name, cpu.String(), mem.String(), window},
		Object: runtime.RawExtension{Object: obj},
	}
}
