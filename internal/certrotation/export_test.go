package certrotation

// SetControllerName lets a test run two replicas' rotators in one process: controller
// names are unique per process.
func (r *Rotation) SetControllerName(name string) { r.controllerName = name }
