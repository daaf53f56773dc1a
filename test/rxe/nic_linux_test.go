package rxe

import "testing"

func TestNICProps(t *testing.T) {
	for _, s := range []string{"", "iommu_platform=on", "iommu_platform=on,disable-legacy=on", "mq=on,vectors=6"} {
		if !nicPropsRE.MatchString(s) {
			t.Errorf("%q refused", s)
		}
	}
	for _, s := range []string{",", "on", "a=b,", "=on", "a=b c", "a=b;rm", "-device=x", "a=b,,c=d", "A=b"} {
		if nicPropsRE.MatchString(s) {
			t.Errorf("%q taken", s)
		}
	}
}
