package certrotation

import (
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	valid := Options{
		Enabled: true, SecretName: DefaultSecretName, WebhookService: DefaultWebhookService, MetricsService: DefaultMetricsService,
		Validity: DefaultValidity, RenewBefore: DefaultRenewBefore, CAValidity: DefaultCAValidity, CheckInterval: DefaultCheckInterval,
	}
	for _, tc := range []struct {
		name   string
		change func(*Options)
		ok     bool
	}{
		{"the defaults are valid", func(*Options) {}, true},
		{"nothing is checked while the rotation is off", func(o *Options) { o.Enabled, o.Validity = false, 0 }, true},
		{"a certificate already due when issued would be renewed on every check", func(o *Options) { o.RenewBefore = o.Validity }, false},
		{"a check interval as long as the renewal margin can miss the margin", func(o *Options) { o.CheckInterval = o.RenewBefore }, false},
		{"a zero check interval", func(o *Options) { o.CheckInterval = 0 }, false},
		{"a CA that expires before the certificates it signs", func(o *Options) { o.CAValidity = o.Validity }, false},
		{"an empty Secret name", func(o *Options) { o.SecretName = "" }, false},
		{"an empty Service name", func(o *Options) { o.MetricsService = "" }, false},
		{"short values for a test, in the right order", func(o *Options) {
			o.Validity, o.RenewBefore, o.CAValidity, o.CheckInterval = 20*time.Second, 14*time.Second, time.Hour, time.Second
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := valid
			tc.change(&o)
			if err := o.Validate(); (err == nil) != tc.ok {
				t.Errorf("Validate() = %v, want ok=%t", err, tc.ok)
			}
		})
	}
}
