package main

import (
	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/loadbalancingexporter"
	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/prometheusexporter"
	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/prometheusremotewriteexporter"
	"github.com/open-telemetry/opentelemetry-collector-contrib/extension/healthcheckextension"
	"github.com/open-telemetry/opentelemetry-collector-contrib/processor/deltatocumulativeprocessor"
	"github.com/open-telemetry/opentelemetry-collector-contrib/processor/transformprocessor"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/debugexporter"
	"go.opentelemetry.io/collector/exporter/otlpexporter"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/batchprocessor"
	"go.opentelemetry.io/collector/processor/memorylimiterprocessor"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

const (
	coreModules    = "go.opentelemetry.io/collector/"
	contribModules = "github.com/open-telemetry/opentelemetry-collector-contrib/"
	release        = " v0.161.0"
)

// components declares exactly the components of this distribution:
// receiver otlp; processors memory_limiter, batch, transform,
// deltatocumulative; exporters prometheus, otlp (traces onwards), debug,
// loadbalancing (agents to gateways) and prometheusremotewrite (gateways to
// storage); extension health_check. No connectors.
func components() (otelcol.Factories, error) {
	otlp := otlpreceiver.NewFactory()
	memoryLimiter := memorylimiterprocessor.NewFactory()
	batch := batchprocessor.NewFactory()
	transform := transformprocessor.NewFactory()
	deltaToCumulative := deltatocumulativeprocessor.NewFactory()
	prometheus := prometheusexporter.NewFactory()
	debug := debugexporter.NewFactory()
	otlpExporter := otlpexporter.NewFactory()
	loadBalancing := loadbalancingexporter.NewFactory()
	remoteWrite := prometheusremotewriteexporter.NewFactory()
	healthCheck := healthcheckextension.NewFactory()

	receivers, err := otelcol.MakeFactoryMap[receiver.Factory](otlp)
	if err != nil {
		return otelcol.Factories{}, err
	}
	processors, err := otelcol.MakeFactoryMap[processor.Factory](memoryLimiter, batch, transform, deltaToCumulative)
	if err != nil {
		return otelcol.Factories{}, err
	}
	exporters, err := otelcol.MakeFactoryMap[exporter.Factory](prometheus, debug, otlpExporter, loadBalancing, remoteWrite)
	if err != nil {
		return otelcol.Factories{}, err
	}
	extensions, err := otelcol.MakeFactoryMap[extension.Factory](healthCheck)
	if err != nil {
		return otelcol.Factories{}, err
	}

	return otelcol.Factories{
		Receivers:  receivers,
		Processors: processors,
		Exporters:  exporters,
		Extensions: extensions,
		// The Collector's own logs and metrics (service::telemetry).
		Telemetry: otelconftelemetry.NewFactory(),

		// Shown by `otelcol-vllm components`.
		ReceiverModules: map[component.Type]string{
			otlp.Type(): coreModules + "receiver/otlpreceiver" + release,
		},
		ProcessorModules: map[component.Type]string{
			memoryLimiter.Type():     coreModules + "processor/memorylimiterprocessor" + release,
			batch.Type():             coreModules + "processor/batchprocessor" + release,
			transform.Type():         contribModules + "processor/transformprocessor" + release,
			deltaToCumulative.Type(): contribModules + "processor/deltatocumulativeprocessor" + release,
		},
		ExporterModules: map[component.Type]string{
			prometheus.Type():    contribModules + "exporter/prometheusexporter" + release,
			debug.Type():         coreModules + "exporter/debugexporter" + release,
			otlpExporter.Type():  coreModules + "exporter/otlpexporter" + release,
			loadBalancing.Type(): contribModules + "exporter/loadbalancingexporter" + release,
			remoteWrite.Type():   contribModules + "exporter/prometheusremotewriteexporter" + release,
		},
		ExtensionModules: map[component.Type]string{
			healthCheck.Type(): contribModules + "extension/healthcheckextension" + release,
		},
	}, nil
}
