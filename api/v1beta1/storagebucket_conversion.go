package v1beta1

// Hub marks v1beta1 as the version every other StorageBucket version converts through.
func (*StorageBucket) Hub() {}
