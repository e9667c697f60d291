// Command otelcol-vllm is a minimal OpenTelemetry Collector distribution for
// vllm-otel-metrics: OTLP in, vLLM-style Prometheus names out.
package main

import (
	"log"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/envprovider"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/confmap/provider/yamlprovider"
	"go.opentelemetry.io/collector/otelcol"
)

// version is the collector release this distribution is built from; all
// collector modules in go.mod are pinned to it.
const version = "0.161.0-vllm"

func main() {
	settings := otelcol.CollectorSettings{
		BuildInfo: component.BuildInfo{
			Command:     "otelcol-vllm",
			Description: "OpenTelemetry Collector for vllm-otel-metrics",
			Version:     version,
		},
		Factories: components,
		ProviderModules: map[string]string{
			"file": "go.opentelemetry.io/collector/confmap/provider/fileprovider v1.67.0",
			"env":  "go.opentelemetry.io/collector/confmap/provider/envprovider v1.67.0",
			"yaml": "go.opentelemetry.io/collector/confmap/provider/yamlprovider v1.67.0",
		},
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				// URIs come from --config (a plain path means file:...).
				// ${VAR} without a scheme means ${env:VAR}.
				DefaultScheme: "env",
				ProviderFactories: []confmap.ProviderFactory{
					fileprovider.NewFactory(),
					envprovider.NewFactory(),
					yamlprovider.NewFactory(),
				},
			},
		},
	}

	if err := otelcol.NewCommand(settings).Execute(); err != nil {
		log.Fatal(err)
	}
}
